"""ViT data readers, training, resume after a kill, the comparison table and the CLI."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from tokensde.cli.vit import register
from tokensde.io.store import StoreError
from tokensde.model.params import ParameterError
from tokensde.vit import (
    DatasetError,
    MissingDatasetError,
    TrainConfig,
    ViTConfig,
    compact,
    load_dataset,
    lr_at,
    summarise,
    train_run,
)
from tokensde.vit.data import _FASHION_DIR, _read_idx
from tokensde.vit.train import CHECKPOINT, LOG, _augment

DIGITS_VIT = ViTConfig(image_size=8, patch=4, dim=64, depth=2, heads=4)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_digits_one_epoch_beats_chance(digits, tmp_path: Path) -> None:
    cfg = TrainConfig(epochs=1, batch_size=32, lr=3e-3)
    result = train_run(digits, DIGITS_VIT, cfg, "default", tmp_path)
    assert len(digits.y_test) == 360 and digits.classes == 10
    assert result["final"]["test_acc"] > 0.75  # chance is 0.10
    assert result["final"]["epoch"] == 1 and result["version"]


def test_lr_schedule_closed_form() -> None:
    total, w, base = 100, 10, 2.0  # warm-up 0.1 of 100 steps
    assert lr_at(0, total, 0.1, base) == pytest.approx(base / w)
    assert lr_at(w - 1, total, 0.1, base) == pytest.approx(base)
    assert lr_at(w, total, 0.1, base) == pytest.approx(base)
    assert lr_at(w + 45, total, 0.1, base) == pytest.approx(base / 2)
    assert lr_at(total, total, 0.1, base) == pytest.approx(0.0, abs=1e-12)
    lrs = [lr_at(s, total, 0.1, base) for s in range(w, total)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))


def test_augment_shifts_images() -> None:
    x = torch.zeros(64, 1, 6, 6)
    x[:, :, 3, 3] = 1.0
    y = _augment(x, 2, False, torch.Generator().manual_seed(0))
    assert torch.equal(y.sum((1, 2, 3)), torch.ones(64))  # the dot stays inside (shift <= 2)
    pos = y[:, 0].flatten(1).argmax(1)
    rows, cols = pos // 6 - 3, pos % 6 - 3
    assert rows.abs().max() == 2 and cols.abs().max() == 2 and len(set(pos.tolist())) > 10
    flipped = _augment(x, 0, True, torch.Generator().manual_seed(0))
    assert 10 < int((flipped[:, 0, 3, 2] == 1).sum()) < 54  # column 3 -> 2 under a flip


RESUME_SCRIPT = """
import sys
from tokensde.vit import TrainConfig, ViTConfig, load_dataset, train_run
cfg = ViTConfig(image_size=8, patch=4, dim=32, depth=2, heads=2)
train_run(load_dataset("digits", train_subset=500), cfg, TrainConfig(epochs={epochs}, batch_size=32),
          "shared", sys.argv[1], threads=1)
"""


@pytest.mark.slow
def test_resume_after_kill_continues_from_last_checkpoint(tmp_path: Path) -> None:
    epochs = 10
    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", RESUME_SCRIPT.format(epochs=epochs),
                             str(killed)], env=env)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if (killed / LOG).is_file() and (killed / LOG).read_text().count("\n") >= 1:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = torch.load(killed / CHECKPOINT, weights_only=True)["history"]
    assert 1 <= len(done) < epochs, "the run was not interrupted mid-way"
    assert not (killed / "result.json").exists()

    cfg = ViTConfig(image_size=8, patch=4, dim=32, depth=2, heads=2)
    tc = TrainConfig(epochs=epochs, batch_size=32)
    digits = load_dataset("digits", train_subset=500)
    resumed = train_run(digits, cfg, tc, "shared", killed, threads=1)
    straight = train_run(digits, cfg, tc, "shared", tmp_path / "straight", threads=1)
    log = [json.loads(line) for line in (killed / LOG).read_text().splitlines()]
    assert [r["epoch"] for r in log] == list(range(1, epochs + 1))
    # the finished epochs were kept, not redone (their wall times are the killed run's)
    assert [r["seconds"] for r in log[:len(done)]] == [r["seconds"] for r in done]
    for a, b in zip(resumed["history"], straight["history"], strict=True):
        for key in ("train_loss", "test_loss", "test_acc", "lr"):
            assert a[key] == b[key], (a["epoch"], key)


def test_checkpoint_of_another_run_is_refused(digits, tmp_path: Path) -> None:
    cfg = ViTConfig(image_size=8, patch=4, dim=16, depth=1, heads=2)
    train_run(digits, cfg, TrainConfig(epochs=1), "default", tmp_path)
    with pytest.raises(ParameterError, match=r"result.json belongs to a different run.*arm"):
        train_run(digits, cfg, TrainConfig(epochs=1), "identity", tmp_path)
    (tmp_path / "result.json").unlink()
    with pytest.raises(ParameterError, match=r"checkpoint.pt belongs to a different run.*train"):
        train_run(digits, cfg, TrainConfig(epochs=1, lr=1e-3), "default", tmp_path)
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.raises(StoreError, match="not a readable checkpoint"):
        train_run(digits, cfg, TrainConfig(epochs=1), "default", tmp_path)


def _write_cifar(root: Path, per_batch: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    raw = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                 b"filenames": [f"{name}_{k}.png".encode() for k in range(per_batch)]}
        with open(root / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
        raw[name] = (data, np.array(labels))
    return raw


def test_cifar10_reader_on_generated_batches(tmp_path: Path) -> None:
    raw = _write_cifar(tmp_path / "cifar-10-batches-py")
    data = load_dataset("cifar10", tmp_path)  # the parent directory works too
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert data.y_train.tolist() == np.concatenate(
        [raw[f"data_batch_{i}"][1] for i in range(1, 6)]).tolist()
    mean = np.array(data.info["normalisation"]["mean"])[:, None, None]
    std = np.array(data.info["normalisation"]["std"])[:, None, None]
    pixels = data.x_test[2].numpy() * std + mean  # undo the standardisation
    d, _ = raw["test_batch"]
    # row layout: 1024 red, 1024 green, 1024 blue values, each 32 rows of 32
    assert np.allclose(pixels[1, 5, 7], d[2, 1024 + 5 * 32 + 7], atol=1e-3)
    assert np.allclose(pixels, d[2].reshape(3, 32, 32), atol=1e-3)
    assert data.flip and data.shift == 2


def test_cifar10_reader_refuses_code_in_pickles(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    with open(tmp_path / "test_batch", "wb") as fh:
        pickle.dump({b"data": os.getcwd, b"labels": []}, fh)
    with pytest.raises(DatasetError, match="refusing to load"):
        load_dataset("cifar10", tmp_path)


def test_missing_datasets_say_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(MissingDatasetError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion-mnist", tmp_path)
    with pytest.raises(MissingDatasetError, match=r"cifar-10-python\.tar\.gz.*--data-dir"):
        load_dataset("cifar10", tmp_path)
    with pytest.raises(MissingDatasetError, match="needs --data-dir"):
        load_dataset("cifar10")
    with pytest.raises(ParameterError, match="dataset must be one of"):
        load_dataset("mnist")


def test_idx_reader(tmp_path: Path) -> None:
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\0\0\x08\x03" + np.array([2, 3, 4], ">u4").tobytes() + arr.tobytes())
    assert np.array_equal(_read_idx(path), arr)
    with gzip.open(path, "wb") as fh:
        fh.write(b"\0\0\x08\x03" + np.array([2, 3, 5], ">u4").tobytes() + arr.tobytes())
    with pytest.raises(DatasetError, match="bad IDX header or length"):
        _read_idx(path)


@pytest.mark.skipif(not _FASHION_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_fashion_mnist_from_the_debian_package() -> None:
    data = load_dataset("fashion-mnist", train_subset=1000, test_subset=500)
    assert data.x_train.shape == (1000, 1, 28, 28) and data.x_test.shape == (500, 1, 28, 28)
    assert data.info["train"] == "first 1000 of 60000" and data.info["test"] == "first 500 of 10000"
    assert set(data.y_train.tolist()) == set(range(10))
    assert abs(float(data.x_train.mean())) < 1e-4 and abs(float(data.x_train.std()) - 1) < 1e-3


def test_summary_pairs_arms_with_default() -> None:
    def run(accs):
        return {"history": [{"test_acc": a} for a in accs]}

    results = {"default": {0: run([0.5, 0.8]), 1: run([0.6, 0.7])},
               "identity": {0: run([0.4, 0.6]), 1: run([0.6, 0.6])}}
    s = summarise(results, [0, 1])
    assert s["arms"]["default"]["runs"] == [0.8, 0.7]
    assert s["arms"]["default"]["sd"] == pytest.approx(math.sqrt(0.005))
    p = s["paired"]["identity"]
    assert p["diffs"] == pytest.approx([-0.2, -0.1])
    assert [q["mean"] for q in p["per_epoch"]] == pytest.approx([-0.05, -0.15])
    assert p["lo"] == pytest.approx(-0.15 - 12.706204736 * 0.05)  # sd/sqrt(2) = 0.05


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Test app."""

    register(app)
    return app


@pytest.mark.slow
def test_cli_compare_json_shape_and_figure(tmp_path: Path) -> None:
    args = ["vit", "compare", "--dataset", "digits", "--epochs", "1", "--seeds", "2",
            "--arms", "default,suppressed:0", "--dim", "16", "--depth", "1", "--heads", "2",
            "--jobs", "1", "--out", str(tmp_path), "--json", "--no-progress"]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"arms", "dataset", "epochs"} and doc["dataset"] == "digits"
    assert list(doc["arms"]) == ["default", "noise:0"] and doc["epochs"] == 1
    for arm in doc["arms"].values():
        assert set(arm) == {"mean", "sd", "runs"} and len(arm["runs"]) == 2
        assert arm["mean"] == pytest.approx(np.mean(arm["runs"]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["kind"] == "tokensde.vit.compare" and summary["data"]["train"].startswith(
        "first 1437")
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = CliRunner().invoke(_app(), args)  # finished runs are read back, same numbers
    assert json.loads(again.stdout) == doc
    assert compact(summary) == doc


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(_app(), ["vit", "compare", "--arms", "default,bogus:1",
                                      "--out", str(tmp_path)])
    assert res.exit_code == 2 and "error: arm must be one of" in res.output
    res = CliRunner().invoke(_app(), ["vit", "compare", "--dataset", "fashion-mnist",
                                      "--data-dir", str(tmp_path), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "apt-get install dataset-fashion-mnist" in res.output


def test_cli_geometry(tmp_path: Path) -> None:
    res = CliRunner().invoke(_app(), [
        "vit", "geometry", "--dataset", "digits", "--arms", "default,identity", "--images", "8",
        "--seeds", "1", "--depth", "3", "--dim", "16", "--heads", "2", "--out", str(tmp_path),
        "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["depths"] == [0, 1, 2, 3] and len(doc["arms"]["identity"]["near_pos"]) == 4
    assert (tmp_path / "geometry.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_parallel_jobs_give_the_same_numbers(tmp_path: Path) -> None:
    from tokensde.vit import DataSpec, compare, parse_arms

    cfg = ViTConfig(image_size=8, patch=4, dim=16, depth=1, heads=2)
    args = (DataSpec("digits", train_subset=300), cfg, TrainConfig(epochs=2, batch_size=32),
            parse_arms("default,identity"), [0, 1])
    one = compare(*args, tmp_path / "one", jobs=1)
    two = compare(*args, tmp_path / "two", jobs=2)
    assert one["arms"] == two["arms"] and one["paired"] == two["paired"]
