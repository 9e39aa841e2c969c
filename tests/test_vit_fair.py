"""The fair ViT protocol (issue 25): stacked training equals one-model training, the validation
split, the .npz data file, the learning-rate choice never reads test labels, and the whole
pipeline (`tokensde vit fair --size fair-tiny`, resume, report) on digits."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as st

from tokensde.model.params import ParameterError
from tokensde.vit import TrainConfig, ViTConfig, load_dataset, make_model
from tokensde.vit.data import DatasetError, _export_npz
from tokensde.vit.fair import _fair_config
from tokensde.vit.fair_choice import _SETUP, _choose_lr, _per_seed
from tokensde.vit.fair_run import _promising_first, _run_fair
from tokensde.vit.fair_stats import _fair_gaps, _plateau
from tokensde.vit.stack import Member, StackedViT, _train_stack
from tokensde.vit.train import _augment, _draw_augment, _evaluate, _shift_flip, make_optimizer, train_epoch

ARMS = ("default", "noise:0", "hybrid:0", "identity")
CFG = ViTConfig(image_size=8, channels=1, patch=4, dim=16, depth=3, heads=2, norm="rms",
                residual_scale=True, block="attention-only")


@pytest.fixture(scope="module")
def digits() -> object:
    return load_dataset("digits", train_subset=300, test_subset=100, val_subset=200)


def test_validation_split_is_the_training_images_after_the_kept_ones() -> None:
    """val = training images [train_subset, train_subset + val_subset), standardised with the
    training statistics; the test images are untouched; too many is a ParameterError."""
    full = load_dataset("digits")
    d = load_dataset("digits", train_subset=300, val_subset=200)
    mean, std = d.info["normalisation"]["mean"][0], d.info["normalisation"]["std"][0]
    raw = full.x_train * full.info["normalisation"]["std"][0] + full.info["normalisation"]["mean"][0]
    torch.testing.assert_close(d.x_val, (raw[300:500] - mean) / std, rtol=0, atol=1e-5)
    assert torch.equal(d.y_val, full.y_train[300:500])
    assert torch.equal(d.y_train, full.y_train[:300])
    assert torch.equal(d.y_test, full.y_test)
    rest = load_dataset("digits", val_subset=100)  # no train_subset: all but the last 100
    assert len(rest.y_train) == 1437 - 100 and torch.equal(rest.y_val, full.y_train[-100:])
    with pytest.raises(ParameterError, match="train_subset \\+ val_subset"):
        load_dataset("digits", train_subset=1400, val_subset=100)


def test_npz_export_round_trip_and_errors(tmp_path: Path) -> None:
    """A data set read back from its .npz export equals the original (first N images)."""
    f = tmp_path / "d.npz"
    info = _export_npz("digits", f, 500, 100)
    assert info["train"] == 500 and f.stat().st_size == info["bytes"]
    a = load_dataset("digits", f, train_subset=300, test_subset=100, val_subset=200)
    b = load_dataset("digits", train_subset=300, test_subset=100, val_subset=200)
    for k in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    from typer.testing import CliRunner

    from tokensde.cli import app

    res = CliRunner().invoke(app, ["vit", "export-data", "--dataset", "digits", "--train", "500",
                                   "--test", "100", "--out", str(tmp_path / "c.npz")])
    assert res.exit_code == 0 and "500 training + 100 test images" in res.output, res.output
    assert (tmp_path / "c.npz").read_bytes()[:2] == b"PK"
    with pytest.raises(DatasetError, match="holds data set 'digits'"):
        load_dataset("fashion-mnist", f)
    with pytest.raises(ParameterError, match="train must be <= 1437"):
        _export_npz("digits", tmp_path / "e.npz", 5000, 10)
    with pytest.raises(ParameterError, match=r"end in \.npz"):
        _export_npz("digits", tmp_path / "e.zip", 10, 10)


def test_augment_is_draw_then_apply() -> None:
    """augment = shift_flip(draw_augment): same generator state, same images; a shift moves
    pixels by offset - shift."""
    x = torch.arange(2 * 1 * 5 * 5, dtype=torch.float32).view(2, 1, 5, 5)
    a = _augment(x, 1, True, torch.Generator().manual_seed(4))
    offsets, mask = _draw_augment(2, 1, True, torch.Generator().manual_seed(4))
    assert torch.equal(a, _shift_flip(x, offsets, mask, 1))
    y = _shift_flip(x, torch.tensor([[2, 0], [1, 1]]), None, 1)  # rows dy, columns dx = 1: none
    assert torch.equal(y[0, 0, :4], x[0, 0, 1:]) and not y[0, 0, 4].any()  # dy = 2: up one
    assert torch.equal(y[1, 0, 1:], x[1, 0, :4]) and not y[1, 0, 0].any()  # dy = 0: down one


def test_stacked_forward_is_each_model_forward() -> None:
    """Model r of the stack computes make_model(cfg, arm_r, seed_r) on its own images."""
    members = [Member("default", 0, 1e-3), Member("hybrid:0", 5, 2e-3), Member("identity", 2, 3e-3)]
    stack = StackedViT(CFG, members)
    x = torch.randn(3, 7, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = stack.forward(x)
    for r, m in enumerate(members):
        with torch.no_grad():
            want = make_model(CFG, m.arm, m.seed)(x[r])
        torch.testing.assert_close(got[r], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ParameterError, match="attention-only"):
        StackedViT(dataclasses.replace(CFG, block="standard", norm="layer"), members)


def test_stacked_training_equals_one_model_training(digits) -> None:
    """Two epochs of two stacked models (different arms, seeds, rates) end at the weights and
    validation accuracy of train_epoch + torch.optim.AdamW run one model at a time."""
    members = [Member("default", 0, 2e-3), Member("noise:0", 3, 5e-3)]
    train = TrainConfig(epochs=2, batch_size=64)
    stack, rec = _train_stack(digits, CFG, members, train)
    for r, m in enumerate(members):
        cfg = dataclasses.replace(train, lr=m.lr, seed=m.seed)
        model = make_model(CFG, m.arm, m.seed)
        opt = make_optimizer(model, cfg)
        for epoch in range(2):
            last = train_epoch(model, opt, digits, cfg, epoch)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        torch.testing.assert_close(stack.flat[r], flat, rtol=0, atol=2e-5)
        assert rec["val"][r][-1] == pytest.approx(_evaluate(model, digits.x_val, digits.y_val)["acc"])
        assert rec["train_loss"][r] == pytest.approx(last["train_loss"], rel=1e-4)


class _Poisoned:
    """Test labels that raise on any use."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"test labels read ({name})")

    def __getitem__(self, key: object) -> object:
        raise AssertionError("test labels read")

    def __len__(self) -> int:
        raise AssertionError("test labels read")


def test_training_and_choice_never_read_test_labels(digits) -> None:
    """train_stack on data whose test labels raise gives the same validation curves; choose_lr on
    per-seed rows without any test column gives the same choice as with them."""
    members = [Member("default", 1, 2e-3), Member("default", 1, 8e-3)]
    train = TrainConfig(epochs=1, batch_size=64)
    _, clean = _train_stack(digits, CFG, members, train)
    poisoned = dataclasses.replace(digits, y_test=_Poisoned(), x_test=_Poisoned())
    _, blind = _train_stack(poisoned, CFG, members, train)
    assert blind["val"] == clean["val"]
    rng = np.random.default_rng(0)
    rows = pd.DataFrame([{"arm": a, "epochs": e, "lr": lr, "train_seed": s,
                          "val_acc": rng.uniform(), "test_acc": rng.uniform()}
                         for a in ("default", "noise:0") for e in (1, 3) for lr in (1e-3, 2e-3, 4e-3)
                         for s in range(4)])
    want = _choose_lr(rows)
    assert want["complete"].all()
    cut = rows[~((rows["arm"] == "noise:0") & (rows["lr"] == 4e-3))]
    partial = _choose_lr(cut)
    # a rate one arm lacks is a choice for no arm: default chooses from {1e-3, 2e-3} too
    assert not partial["complete"].any()
    assert all(list(c) == [1e-3, 2e-3] for c in partial["common"])
    cm = cut[cut["lr"] < 3e-3].groupby(["arm", "epochs", "lr"])["val_acc"].mean()
    for _, r in partial.iterrows():
        assert r["lr"] == cm.loc[(r["arm"], r["epochs"])].idxmax()
    assert list(partial[partial["arm"] == "default"]["grid"].iloc[0]) == [1e-3, 2e-3, 4e-3]
    assert _choose_lr(rows.drop(columns="test_acc")).equals(want)
    assert _choose_lr(rows.assign(test_acc=-rows["test_acc"])).equals(want)
    # and the choice is the arg-max of the mean validation accuracy
    means = rows.groupby(["arm", "epochs", "lr"])["val_acc"].mean()
    for _, r in want.iterrows():
        assert r["lr"] == means.loc[(r["arm"], r["epochs"])].idxmax()
        assert r["val"] == pytest.approx(100 * means.loc[(r["arm"], r["epochs"])].max())


def test_fair_gaps_pair_each_arm_at_its_own_rate() -> None:
    """The gap is paired by seed between the arm at its chosen rate and default at its own;
    the interval is the t-interval of the hand-computed differences."""
    rng = np.random.default_rng(3)
    rows = []
    for s in range(6):
        base = rng.normal(0.7, 0.02)
        for lr in (1e-3, 2e-3):
            rows.append({"arm": "default", "epochs": 3, "lr": lr, "train_seed": s,
                         "val_acc": 0.8 if lr == 1e-3 else 0.7, "test_acc": base + 0.01 * (lr == 1e-3)})
            rows.append({"arm": "noise:0", "epochs": 3, "lr": lr, "train_seed": s,
                         "val_acc": 0.6 if lr == 1e-3 else 0.65,
                         "test_acc": base - 0.03 + rng.normal(0, 0.01)})
    seeds = pd.DataFrame(rows)
    chosen = _choose_lr(seeds)
    assert chosen.set_index("arm")["lr"].to_dict() == {"default": 1e-3, "noise:0": 2e-3}
    gaps = _fair_gaps(seeds, chosen).set_index("arm")
    a = seeds[(seeds["arm"] == "noise:0") & (seeds["lr"] == 2e-3)].set_index("train_seed")["test_acc"]
    b = seeds[(seeds["arm"] == "default") & (seeds["lr"] == 1e-3)].set_index("train_seed")["test_acc"]
    d = 100 * (a - b).to_numpy()
    half = st.t.ppf(0.975, 5) * d.std(ddof=1) / math.sqrt(6)
    g = gaps.loc["noise:0"]
    assert g["gap"] == pytest.approx(d.mean()) and g["pairs"] == 6
    assert (g["gap_lo"], g["gap_hi"]) == pytest.approx((d.mean() - half, d.mean() + half))
    # with both at 2e-3 (in the grid): the fixed-rate gap, paired the same way
    a2 = seeds[(seeds["arm"] == "noise:0") & (seeds["lr"] == 2e-3)]["test_acc"].to_numpy()
    b2 = seeds[(seeds["arm"] == "default") & (seeds["lr"] == 2e-3)]["test_acc"].to_numpy()
    assert g["gap_fixed"] == pytest.approx(100 * (a2 - b2).mean())
    assert math.isnan(gaps.loc["default", "gap"])


def test_promising_first_runs_each_arm_near_its_last_choice() -> None:
    """Budgets in order; within the longer one, every arm's rates by their log2 distance from
    the arm's choice at the shorter budget (ties: the smaller rate), arms interleaved; without a
    complete earlier choice, by rate."""
    cfg = _fair_config("fair")
    cells = cfg.cells()
    chosen = pd.DataFrame([{**{k: v for k, v in cells[0].params.items() if k in _SETUP},
                            "arm": arm, "epochs": 10, "lr": lr, "complete": True}
                           for arm, lr in (("default", 4e-3), ("noise:0", 1e-3),
                                           ("hybrid:0", 4e-3), ("identity", 5e-4))])
    todo = [c for c in cells if c.params["epochs"] >= 10]
    out = _promising_first(todo, chosen)
    assert sorted(c.id for c in out) == sorted(c.id for c in todo)
    ten = [(c.params["arm"], c.params["lr"]) for c in out if c.params["epochs"] == 10]
    assert ten == sorted(ten, key=lambda a: (a[1], ARMS.index(a[0])))  # no earlier choice
    thirty = [(c.params["arm"], c.params["lr"]) for c in out if c.params["epochs"] == 30]
    assert [c.params["epochs"] for c in out] == [10] * 20 + [30] * 20
    assert thirty[:4] == [("identity", 5e-4), ("noise:0", 1e-3), ("default", 4e-3),
                          ("hybrid:0", 4e-3)]
    assert thirty[4:8] == [("noise:0", 5e-4), ("identity", 1e-3), ("default", 2e-3),
                           ("noise:0", 2e-3)]
    assert _promising_first(todo, pd.DataFrame()) == sorted(
        todo, key=lambda c: (c.params["epochs"], c.params["lr"], c.index))


@pytest.mark.slow
def test_fair_tiny_pipeline_resumes_reports_and_ignores_test_labels(tmp_path: Path) -> None:
    """`tokensde vit fair --size fair-tiny`: 8 cells, report tables and figures; a rerun reuses
    every cell; the same sweep with permuted test labels chooses the same rates from the same
    validation numbers while its test accuracies change."""
    from typer.testing import CliRunner

    from tokensde.cli import app

    out = tmp_path / "fair"
    res = CliRunner().invoke(app, ["vit", "fair", "--size", "fair-tiny", "--out", str(out),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    assert "8 cells trained, 0 reused, 0 failed" in res.output
    assert "Chosen peak learning rate" in res.output
    for f in ("fair.json", "fair.md", "fair_lr.png", "fair_gaps.png"):
        assert (out / f).is_file()
    again = CliRunner().invoke(app, ["vit", "fair", "--size", "fair-tiny", "--out", str(out),
                                     "--quiet", "--no-figures"])
    assert "0 cells trained, 8 reused" in again.output
    doc = json.loads((out / "fair.json").read_text())
    assert len(doc["gaps"]) == 4 and len(doc["chosen"]) == 4
    table = _per_seed(pd.read_parquet(out / "table.parquet"))
    assert len(table) == 8 * 3 and set(table["train_seed"]) == {0, 1, 2}
    assert all(len(c) == e for c, e in zip(table["test_curve"], table["epochs"], strict=True))
    level = _plateau(table, _choose_lr(table))
    assert level["epochs"] == 2 and len(level["curve"]) == 2

    poison = _run_fair(_fair_config("fair-tiny", poison_test=True), tmp_path / "poison",
                      figures=False)
    assert poison["failed"] == 0
    blind = _per_seed(pd.read_parquet(tmp_path / "poison" / "table.parquet"))
    key = ["arm", "epochs", "lr", "train_seed"]
    a, b = table.sort_values(key), blind.sort_values(key)
    assert np.array_equal(a["val_acc"], b["val_acc"])
    assert not np.array_equal(a["test_acc"], b["test_acc"])
    ca, cb = _choose_lr(table), _choose_lr(blind)
    assert ca[["arm", "epochs", "lr"]].equals(cb[["arm", "epochs", "lr"]])


def test_fair_config_errors(tmp_path: Path) -> None:
    """Unknown size, a grid parameter given as fixed, a TOML of another kind; a missing data
    file stops the sweep before any cell runs."""
    from tokensde.vit.data import MissingDatasetError

    with pytest.raises(MissingDatasetError, match=r"none\.npz does not exist"):
        _run_fair(_fair_config("fair-tiny", data_dir=str(tmp_path / "none.npz")), tmp_path / "o")
    assert not (tmp_path / "o").exists()
    with pytest.raises(FileNotFoundError):
        _fair_config("huge")
    with pytest.raises(ParameterError, match="lr vary in the grid"):
        _fair_config("fair", lr=1e-3)
    with pytest.raises(ParameterError, match="of kind 'vit_depth'"):
        from tokensde.vit.depth import _SWEEPS
        _fair_config(_SWEEPS / "vit-depth-tiny.toml")
    cfg = _fair_config("fair")
    cells = cfg.cells()
    assert len(cells) == 80 and [c.params["epochs"] for c in cells[-20:]] == [30] * 20
    assert sorted({c.params["lr"] for c in cells}) == [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]
    assert {c.params["seeds"] for c in cells} == {12}
    cifar = _fair_config("fair-cifar", data_dir="/data/cifar").cells()
    assert len(cifar) == 80 and cifar[0].params["train_subset"] + cifar[0].params["val_subset"] \
        == 50000 and cifar[0].params["data_dir"] == "/data/cifar"


def test_choice_is_complete_against_each_budgets_own_grid() -> None:
    """With the planned cells, a budget is complete once every arm has finished *its* grid,
    even when another budget's grid is wider; the choice itself does not depend on the plan."""
    rng = np.random.default_rng(5)
    grids = {1: (1e-3, 2e-3, 4e-3), 3: (1e-3, 2e-3)}
    plan = pd.DataFrame([{"arm": a, "epochs": e, "lr": lr} for a in ("default", "noise:0")
                         for e, g in grids.items() for lr in g])
    rows = pd.DataFrame([{**r, "train_seed": s, "val_acc": rng.uniform(), "test_acc": 0.5}
                         for r in plan.to_dict("records") for s in range(3)])
    with_plan, without = _choose_lr(rows, plan), _choose_lr(rows)
    assert with_plan["complete"].all()
    assert without.set_index(["arm", "epochs"])["complete"].to_dict() == {
        ("default", 1): True, ("default", 3): False, ("noise:0", 1): True, ("noise:0", 3): False}
    assert with_plan["lr"].equals(without["lr"])
    assert [list(p) for p in with_plan["plan"]] == [list(grids[e]) for e in with_plan["epochs"]]
    cut = rows[~((rows["epochs"] == 3) & (rows["lr"] == 2e-3) & (rows["arm"] == "noise:0"))]
    part = _choose_lr(cut, plan).set_index(["arm", "epochs"])
    assert not part.loc[("default", 3), "complete"] and part.loc[("default", 1), "complete"]
    assert part.loc[("default", 3), "lr"] == 1e-3  # the one rate both arms have at 3 epochs


@pytest.mark.slow
def test_fair_report_merges_a_sweep_that_widens_the_grid(tmp_path: Path) -> None:
    """`fair-report A B`: B's rates join A's grid at B's budgets only (paired by seed, the choice
    over the union), a rate outside a budget's grid reads '–'; a cell given twice, or a sweep of
    another kind, is refused by name."""
    from typer.testing import CliRunner

    from tokensde.cli import app
    from tokensde.vit.depth import _SWEEPS

    a, b = tmp_path / "a", tmp_path / "b"
    _run_fair(_fair_config("fair-tiny"), a, figures=False)
    wide = tmp_path / "wide.toml"
    wide.write_text((_SWEEPS / "vit-fair-tiny.toml").read_text().replace(
        "epochs = [1, 2]", "epochs = [1]").replace("lr = [2e-3, 8e-3]", "lr = [3.2e-2]")
        .replace('name = "vit-fair-tiny"', 'name = "vit-fair-tiny-wide"'))
    _run_fair(_fair_config(wide), b, figures=False)
    res = CliRunner().invoke(app, ["vit", "fair-report", str(a), str(b), "--no-figures"])
    assert res.exit_code == 0, res.output
    doc = json.loads((a / "fair.json").read_text())
    chosen = pd.DataFrame(doc["chosen"]).set_index(["arm", "epochs"])
    assert chosen["complete"].all() and doc["more"][0]["path"] == str(b)
    assert [list(g) for g in chosen.loc[[("default", 1), ("default", 2)], "grid"]] == \
        [[2e-3, 8e-3, 3.2e-2], [2e-3, 8e-3]]
    seeds = _per_seed(pd.concat([pd.read_parquet(d / "table.parquet") for d in (a, b)]))
    means = seeds.groupby(["arm", "epochs", "lr"])["val_acc"].mean()
    for (arm, e), r in chosen.iterrows():
        assert r["lr"] == means.loc[(arm, e)].idxmax()
    row = next(x for x in res.output.splitlines() if x.startswith("| default | 2 |"))
    assert row.endswith("| – |")
    # `vit fair --with`: a resumed sweep reports with the sweeps that widen it
    res = CliRunner().invoke(app, ["vit", "fair", "--size", str(wide), "--out", str(b), "--with",
                                   str(a), "--quiet", "--no-figures"])
    assert res.exit_code == 0 and "0 cells trained" in res.output, res.output
    both = json.loads((b / "fair.json").read_text())
    assert both["more"][0]["path"] == str(a) and both["chosen"] == doc["chosen"]
    dup = CliRunner().invoke(app, ["vit", "fair-report", str(a), str(a), "--no-figures"])
    assert dup.exit_code != 0 and f"planned by {a} and {a}" in dup.output
    # refused before any training: an overlapping grid, another set-up, another kind
    over = tmp_path / "over.toml"
    over.write_text(wide.read_text().replace("lr = [3.2e-2]", "lr = [8e-3, 6.4e-2]"))
    planned_twice = re.escape(f"lr 0.008 is planned by {tmp_path / 'c'} and {a}")
    with pytest.raises(ParameterError, match=planned_twice):
        _run_fair(_fair_config(over), tmp_path / "c", more=[a])
    with pytest.raises(ParameterError, match=r"not one set-up.*train_subset: 500 in .*, 600 in"):
        _run_fair(_fair_config(wide, train_subset=500), tmp_path / "c", more=[a])
    assert not (tmp_path / "c" / "cells").exists()
    from tokensde.vit.depth import _depth_config, _run_depth

    other = tmp_path / "depth"
    _run_depth(_depth_config("tiny"), other)
    bad = CliRunner().invoke(app, ["vit", "fair-report", str(a), str(other), "--no-figures"])
    assert bad.exit_code != 0 and "not 'vit_fair'" in bad.output
    with pytest.raises(ParameterError, match=r"--with .*depth: not a sweep of kind 'vit_fair'"):
        _run_fair(_fair_config(wide), tmp_path / "c", more=[other])


def test_data_location_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    """Without a data_dir, TOKENSDE_DATA_<NAME> says where the data set lives (a .npz file
    here): the same images as the source it was written from, and a cell's parameters (so a
    sweep's fingerprint) do not change; a missing file is named with its variable."""
    from tokensde.vit.data import _data_env

    f = tmp_path / "digits.npz"
    _export_npz("digits", f, train=700, test=150)
    direct = load_dataset("digits", train_subset=300, val_subset=200, test_subset=100)
    monkeypatch.setenv(_data_env("digits"), str(f))
    assert _data_env("fashion-mnist") == "TOKENSDE_DATA_FASHION_MNIST"
    via = load_dataset("digits", train_subset=300, val_subset=200, test_subset=100)
    assert via.info["source"] == str(f)
    for k in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        assert torch.equal(getattr(via, k), getattr(direct, k)), k
    assert len(load_dataset("digits").y_test) == 150  # the file's, not the package's 360
    monkeypatch.setenv(_data_env("digits"), str(tmp_path / "none.npz"))
    from tokensde.vit.data import MissingDatasetError

    with pytest.raises(MissingDatasetError, match=r"TOKENSDE_DATA_DIGITS=.*none.npz does not"):
        load_dataset("digits")
